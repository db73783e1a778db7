//! Places for single sign-on code exchanges in flight on one replica, shared fairly between
//! client networks (see `super`).
//!
//! At most `total` exchanges are in flight ([`crate::config::oidc::SSO_EXCHANGES`]), and at
//! most [`PER_NETWORK`] of one client network's ([`network`]: an IPv4 address, an IPv6 /48). A callback finding no place waits for one, at most the time it is given, in a
//! queue of at most [`WAITING_PER_NETWORK`] per network and [`WAITING`] in all. A place that
//! frees goes to the waiting network with the fewest exchanges in flight, then to the one
//! served longest ago (or never), so a network with nothing in flight is served before the
//! networks queued with exchanges in flight. A full queue makes room for a network by refusing
//! the newest waiter of the network standing worst (the most waiting, then the most in flight,
//! then served last), when that one stands worse than the newcomer would: a quiet network gets
//! in unless every waiting network is as quiet as it (an attacker holding hundreds of networks
//! that were never served still fills the queue: hundreds of IPv4 addresses, or /48s).
//!
//! Attack (found by review): networks were IPv6 /64s, as the lock-out of failed sign-ins
//! counts them, and a /64 is what one home or server is given; but a /56 (256 /64s) is what
//! many ISPs give one customer, and a /48 (65,536 /64s) one site or a free tunnel. Holding one,
//! an attacker appeared as hundreds of networks, took every place and filled the queue with
//! networks never served, and every honest callback was a `503`. A /48 is the smallest block
//! that costs an attacker about what one IPv4 address does, so for sharing places it is one
//! network; people who share a /48 (a site, or a mobile carrier's pool) share its places, as
//! people behind one IPv4 NAT do.
//!
//! Attack (found by review): with one pool of 16 places taken first come, first served and a
//! `503` beyond, a few dozen networks sending junk codes kept every place busy, and every
//! honest sign-in on the replica was refused while it lasted.
//!
//! Memory: a network is known only while it has an exchange in flight or a callback waiting,
//! so at most `total` + [`WAITING`] networks are.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;

/// Code exchanges one client network may have in flight at once on a replica.
pub const PER_NETWORK: usize = 2;
/// Callbacks of one client network that may wait for a place at once; more are refused.
pub const WAITING_PER_NETWORK: usize = 8;
/// Callbacks that may wait for a place at once on a replica, all networks together.
pub const WAITING: usize = 256;

/// A client network (`None`: the client address is unknown; those share one).
type Net = Option<IpAddr>;

/// The client network of address `ip` for sharing places: an IPv4 address (also one mapped
/// into IPv6) whole, an IPv6 address's /48 (see the module doc for why not its /64).
pub fn network(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// The places of one replica.
#[derive(Debug)]
pub struct Places {
    inner: Arc<Mutex<Inner>>,
}

/// The places' state.
#[derive(Debug)]
struct Inner {
    /// Places in all.
    total: usize,
    /// Places taken.
    busy: usize,
    /// Callbacks waiting, all networks together.
    waiting: usize,
    /// The networks with an exchange in flight or a callback waiting.
    nets: HashMap<Net, Network>,
    /// The last waiter id or service turn handed out.
    seq: u64,
}

/// One network's exchanges in flight and callbacks waiting.
#[derive(Debug, Default)]
struct Network {
    in_flight: usize,
    /// The turn it was last given a place in (`0`: not since it was last idle).
    served: u64,
    /// Its waiting callbacks, oldest first: each one's id and where its place is sent.
    waiters: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// One place taken by a network; given back when dropped.
#[derive(Debug)]
pub struct Place {
    inner: Arc<Mutex<Inner>>,
    net: Net,
}

/// A callback waiting for a place; leaving the queue when dropped without its place.
struct Waiting {
    inner: Arc<Mutex<Inner>>,
    net: Net,
    id: u64,
    rx: oneshot::Receiver<()>,
    taken: bool,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Places {
    /// `total` places (at least 1), none taken.
    pub fn new(total: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                total: total.max(1),
                busy: 0,
                waiting: 0,
                nets: HashMap::new(),
                seq: 0,
            })),
        }
    }

    /// A place for an exchange of client network `net`, waiting at most `wait` for one;
    /// `None` when none came in time, or the queue had no room for it (the callback should be
    /// refused before anything is spent or asked).
    pub async fn take(&self, net: Net, wait: Duration) -> Option<Place> {
        let (id, rx) = {
            let mut g = lock(&self.inner);
            if g.busy < g.total && g.in_flight(net) < PER_NETWORK {
                g.grant(net);
                return Some(self.place(net));
            }
            g.enqueue(net)?
        };
        let mut w = Waiting {
            inner: self.inner.clone(),
            net,
            id,
            rx,
            taken: false,
        };
        match tokio::time::timeout(wait, &mut w.rx).await {
            Ok(Ok(())) => {
                w.taken = true;
                Some(self.place(net))
            }
            // Out of time, or pushed out of a full queue: `w` leaves the queue when dropped.
            _ => None,
        }
    }

    fn place(&self, net: Net) -> Place {
        Place {
            inner: self.inner.clone(),
            net,
        }
    }

    /// Places taken now, and callbacks waiting (for tests and metrics).
    pub fn load(&self) -> (usize, usize) {
        let g = lock(&self.inner);
        (g.busy, g.waiting)
    }
}

impl Inner {
    fn in_flight(&self, net: Net) -> usize {
        self.nets.get(&net).map_or(0, |n| n.in_flight)
    }

    fn turn(&mut self) -> u64 {
        self.seq = self.seq.saturating_add(1);
        self.seq
    }

    /// Counts a place as taken by `net`.
    fn grant(&mut self, net: Net) {
        let turn = self.turn();
        let n = self.nets.entry(net).or_default();
        n.in_flight += 1;
        n.served = turn;
        self.busy += 1;
    }

    /// Queues a callback of `net`: its id and where its place will be sent; `None` when
    /// `net` has [`WAITING_PER_NETWORK`] waiting, or the queue is full of networks that stand
    /// no worse than `net` would ([`Inner::standing`]).
    fn enqueue(&mut self, net: Net) -> Option<(u64, oneshot::Receiver<()>)> {
        let mine = self.nets.get(&net).map_or(0, |n| n.waiters.len());
        if mine >= WAITING_PER_NETWORK {
            return None;
        }
        if self.waiting >= WAITING {
            // Room is made by the newest waiter of the network standing worst: the most
            // waiting, then the most in flight, then served last. Found by review: only a
            // network with two more waiting than the newcomer made room, so networks with one
            // waiter each kept a quiet network out however recently they had been served.
            let newcomer = self
                .nets
                .get(&net)
                .map_or((mine + 1, 0, 0), |n| (mine + 1, n.in_flight, n.served));
            let (worst, standing) = self
                .nets
                .iter()
                .filter(|(k, n)| **k != net && !n.waiters.is_empty())
                .map(|(k, n)| (*k, (n.waiters.len(), n.in_flight, n.served)))
                .max_by_key(|(_, s)| *s)?;
            if standing <= newcomer {
                return None;
            }
            // Dropping its sender refuses that waiter.
            self.nets.get_mut(&worst)?.waiters.pop_back();
            self.waiting -= 1;
        }
        let id = self.turn();
        let (tx, rx) = oneshot::channel();
        self.nets
            .entry(net)
            .or_default()
            .waiters
            .push_back((id, tx));
        self.waiting += 1;
        Some((id, rx))
    }

    /// Gives free places to waiting callbacks: each to the network below [`PER_NETWORK`] with
    /// the fewest in flight, then served longest ago, then waiting longest.
    fn dispatch(&mut self) {
        while self.busy < self.total {
            let next = self
                .nets
                .iter()
                .filter(|(_, n)| n.in_flight < PER_NETWORK)
                .filter_map(|(k, n)| n.waiters.front().map(|(id, _)| (*k, n, *id)))
                .min_by_key(|(_, n, id)| (n.in_flight, n.served, *id))
                .map(|(k, _, _)| k);
            let Some(net) = next else { break };
            let Some((_, tx)) = self.nets.get_mut(&net).and_then(|n| n.waiters.pop_front()) else {
                break;
            };
            self.waiting -= 1;
            if tx.send(()).is_ok() {
                self.grant(net);
            }
            self.forget_if_idle(net);
        }
    }

    /// Gives back a place of `net` and hands free places on.
    fn release(&mut self, net: Net) {
        if let Some(n) = self.nets.get_mut(&net) {
            n.in_flight = n.in_flight.saturating_sub(1);
        }
        self.busy = self.busy.saturating_sub(1);
        self.forget_if_idle(net);
        self.dispatch();
    }

    /// Forgets `net` when it has nothing in flight and nothing waiting.
    fn forget_if_idle(&mut self, net: Net) {
        if self
            .nets
            .get(&net)
            .is_some_and(|n| n.in_flight == 0 && n.waiters.is_empty())
        {
            self.nets.remove(&net);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        lock(&self.inner).release(self.net);
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let mut g = lock(&self.inner);
        let queued = g.nets.get_mut(&self.net).and_then(|n| {
            let at = n.waiters.iter().position(|(id, _)| *id == self.id)?;
            n.waiters.remove(at)
        });
        if queued.is_some() {
            g.waiting -= 1;
            g.forget_if_idle(self.net);
        } else if self.rx.try_recv().is_ok() {
            // Given a place as it gave up waiting: hand it on.
            g.release(self.net);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(i: u8) -> Net {
        Some(IpAddr::from([10, 0, 0, i]))
    }

    const NO_WAIT: Duration = Duration::ZERO;

    #[tokio::test]
    async fn a_network_holds_at_most_its_share_and_others_still_get_places() {
        let p = Places::new(4);
        let a1 = p.take(net(1), NO_WAIT).await.unwrap();
        let _a2 = p.take(net(1), NO_WAIT).await.unwrap();
        assert!(
            p.take(net(1), NO_WAIT).await.is_none(),
            "a third of one network"
        );
        let _b = p.take(net(2), NO_WAIT).await.unwrap();
        let _c = p.take(net(3), NO_WAIT).await.unwrap();
        assert!(p.take(net(4), NO_WAIT).await.is_none(), "all taken");
        drop(a1);
        assert_eq!(p.load(), (3, 0));
        let _d = p.take(net(4), NO_WAIT).await.unwrap();
    }

    #[tokio::test]
    async fn a_freed_place_goes_to_the_network_with_least_in_flight_not_the_first_queued() {
        let p = Arc::new(Places::new(2));
        let a1 = p.take(net(1), NO_WAIT).await.unwrap();
        let _b1 = p.take(net(2), NO_WAIT).await.unwrap();
        // Network 1 queues first, network 3 (nothing in flight) after it.
        let (p1, p3) = (p.clone(), p.clone());
        let first = tokio::spawn(async move { p1.take(net(1), Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let late = tokio::spawn(async move { p3.take(net(3), Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(p.load(), (2, 2));
        drop(a1);
        let got = late.await.unwrap();
        assert!(
            got.is_some(),
            "the network with nothing in flight is served"
        );
        assert_eq!(p.load(), (2, 1));
        drop(got);
        assert!(first.await.unwrap().is_some());
    }

    #[tokio::test]
    async fn waiting_is_bounded_and_a_full_queue_makes_room_for_a_quiet_network() {
        let p = Arc::new(Places::new(1));
        let _held = p.take(net(200), NO_WAIT).await.unwrap();
        let mut queued = Vec::new();
        for i in 0..(WAITING / WAITING_PER_NETWORK) {
            for _ in 0..WAITING_PER_NETWORK {
                let p = p.clone();
                let n = net(i as u8);
                queued.push(tokio::spawn(async move {
                    p.take(n, Duration::from_secs(5)).await.is_some()
                }));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(p.load(), (1, WAITING));
        let p2 = p.clone();
        let quiet =
            tokio::spawn(async move { p2.take(net(250), Duration::from_millis(300)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(p.load(), (1, WAITING), "one pushed out, the quiet one in");
        assert!(quiet.await.unwrap().is_none(), "timed out: nothing freed");
        assert_eq!(p.load(), (1, WAITING - 1), "it left the queue");
        for q in queued {
            q.abort();
        }
    }

    #[tokio::test]
    async fn a_waiter_dropped_leaves_no_place_taken() {
        let p = Arc::new(Places::new(1));
        let held = p.take(net(1), NO_WAIT).await.unwrap();
        let p2 = p.clone();
        let w = tokio::spawn(async move { p2.take(net(2), Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.abort();
        let _ = w.await;
        assert_eq!(p.load(), (1, 0));
        drop(held);
        assert_eq!(p.load(), (0, 0));
        assert!(lock(&p.inner).nets.is_empty(), "no network remembered");
    }

    fn wide(i: u16) -> Net {
        Some(IpAddr::from([10, 1, (i >> 8) as u8, i as u8]))
    }

    /// Found by review: a full queue made room only for a network with two fewer waiting than
    /// the most-waiting one, so networks with one waiter each — here each with an exchange in
    /// flight as well — kept a quiet network out. The newest waiter of the network standing
    /// worst makes room, and the quiet network gets the next free place.
    #[tokio::test]
    async fn a_full_queue_of_networks_with_exchanges_in_flight_still_takes_a_quiet_network() {
        let crowd = WAITING as u16;
        let p = Arc::new(Places::new(WAITING + 1));
        let mut held = vec![p.take(net(1), NO_WAIT).await.unwrap()];
        for i in 0..crowd {
            held.push(p.take(wide(i), NO_WAIT).await.unwrap());
        }
        let mut queued = Vec::new();
        for i in 0..crowd {
            let p = p.clone();
            queued.push(tokio::spawn(async move {
                p.take(wide(i), Duration::from_secs(5)).await.is_some()
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(p.load(), (WAITING + 1, WAITING));
        let p2 = p.clone();
        let quiet = tokio::spawn(async move { p2.take(net(2), Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(p.load(), (WAITING + 1, WAITING), "one waiter made room");
        drop(held.remove(0));
        let got = quiet.await.unwrap();
        assert!(got.is_some(), "the quiet network got the freed place");
        let refused = refused_so_far(queued).await;
        assert_eq!(refused, 1, "one crowd waiter was pushed out");
    }

    /// The /48 grouping holds whatever the rest of the address: every /64 (and /56) of a /48
    /// is one network, another /48 is another, and IPv4 addresses (also mapped into IPv6)
    /// stay whole.
    #[test]
    fn an_ipv6_clients_network_is_its_48_and_an_ipv4_clients_its_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let site = network(ip("2001:db8:66::1"));
        assert_eq!(site, ip("2001:db8:66::"));
        for other in ["2001:db8:66:ffff::1", "2001:db8:66:100:1:2:3:4"] {
            assert_eq!(network(ip(other)), site, "{other}");
        }
        assert_ne!(network(ip("2001:db8:67::1")), site);
        assert_eq!(network(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_ne!(network(ip("192.0.2.7")), network(ip("192.0.2.8")));
        assert_eq!(network(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    }

    /// How many of `tasks` have ended refused so far (the others still wait).
    async fn refused_so_far(tasks: Vec<tokio::task::JoinHandle<bool>>) -> usize {
        let mut refused = 0;
        for t in tasks {
            if t.is_finished() && !t.await.unwrap() {
                refused += 1;
            }
        }
        refused
    }
}
