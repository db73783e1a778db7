//! Unit tests of `executor.rs` on a real SQLite store: the turns between lanes.

use super::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Waker};

/// `f` polled once, so that its call is queued on the executor now, in this order.
fn queued<F: Future>(f: F) -> Pin<Box<F>> {
    let mut f = Box::pin(f);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        f.as_mut().poll(&mut cx).is_pending(),
        "the executor is held"
    );
    f
}

/// An executor on a fresh store, and a call holding it until the sender is dropped or sent.
async fn held_executor(
    dir: &tempfile::TempDir,
) -> (
    Executor,
    std::sync::mpsc::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let store = Store::open(dir.path(), 60_000, Arc::new(crate::WireEnvelopes)).unwrap();
    let ex = Executor::start(Arc::new(store)).unwrap();
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let (started, running) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn({
        let ex = ex.clone();
        async move {
            ex.run(false, move |_| {
                let _ = started.send(());
                let _ = hold.recv();
            })
            .await
            .unwrap();
        }
    });
    running.await.unwrap();
    (ex, release, holder)
}

/// Attack: one agent key holding many requests in flight (or sending at its `rate_limits`,
/// above what one writer serves) queued its store calls ahead of every other principal's, so
/// another principal's proposal or decision waited for the whole backlog (here 300 calls,
/// five batches). Now each lane with calls waiting has one taken in turn: the other
/// principal's call runs in the very next batch, second, and the flood's keep their order.
#[tokio::test]
async fn one_principals_backlog_does_not_hold_up_another_principals_call() {
    let dir = tempfile::tempdir().unwrap();
    let (ex, release, holder) = held_executor(&dir).await;
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let call = |lane: &str, name: String| {
        let (ex, order) = (ex.clone(), order.clone());
        queued(in_lane(Lane::Principal(lane.into()), async move {
            ex.run(false, move |_| order.lock().unwrap().push(name))
                .await
        }))
    };
    let flood: Vec<_> = (0..300)
        .map(|i| call("flood", format!("flood {i}")))
        .collect();
    let other = call("other", "other".into());
    release.send(()).unwrap();
    holder.await.unwrap();
    other.await.unwrap();
    for f in flood {
        f.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 301);
    let at = order.iter().position(|n| n == "other").unwrap();
    assert_eq!(
        at, 1,
        "the other principal's call ran second, not after the flood"
    );
    let flood: Vec<_> = order.iter().filter(|n| *n != "other").cloned().collect();
    let expected: Vec<_> = (0..300).map(|i| format!("flood {i}")).collect();
    assert_eq!(
        flood, expected,
        "one lane's calls run in the order they came"
    );
}

/// Calls made outside any request (a sweep, a webhook delivery) are the gateway's lane, and a
/// request without a known key is its address's: neither waits behind a principal's backlog,
/// and a call that panics leaves the rest of its lane to run, in order.
#[tokio::test]
async fn the_gateways_own_calls_and_unknown_senders_take_turns_too() {
    let dir = tempfile::tempdir().unwrap();
    let (ex, release, holder) = held_executor(&dir).await;
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let push = |name: &str| {
        let (order, name) = (order.clone(), name.to_string());
        move |_: &Store| order.lock().unwrap().push(name)
    };
    let lane = Lane::Principal("flood".into());
    let mut flood = Vec::new();
    for i in 0..100 {
        let ex = ex.clone();
        let f = push(&format!("flood {i}"));
        let panics = i == 50;
        flood.push(queued(in_lane(lane.clone(), async move {
            ex.run(false, move |s: &Store| {
                assert!(!panics, "a call that panics");
                f(s)
            })
            .await
        })));
    }
    let sweep = queued({
        let ex = ex.clone();
        let f = push("sweep");
        async move { ex.run(false, f).await }
    });
    let addr = Lane::Address(Some("192.0.2.7".parse().unwrap()));
    let sign_in = queued(in_lane(addr, {
        let ex = ex.clone();
        let f = push("sign-in");
        async move { ex.run(true, f).await }
    }));
    release.send(()).unwrap();
    holder.await.unwrap();
    sweep.await.unwrap();
    sign_in.await.unwrap();
    let mut refused = 0;
    for f in flood {
        refused += usize::from(f.await.is_err());
    }
    assert_eq!(refused, 1, "only the call that panicked got an error");
    let order = order.lock().unwrap().clone();
    let at = |n: &str| order.iter().position(|o| o == n).unwrap();
    assert_eq!(at("sign-in"), 0, "a read runs first in its batch");
    assert!(
        at("sweep") <= 2,
        "the sweep ran in the first batch: {order:?}"
    );
    let flood: Vec<_> = order
        .iter()
        .filter(|n| n.starts_with("flood"))
        .cloned()
        .collect();
    let expected: Vec<_> = (0..100)
        .filter(|i| *i != 50)
        .map(|i| format!("flood {i}"))
        .collect();
    assert_eq!(
        flood, expected,
        "the rest of the lane ran after the panic, in order"
    );
}

/// Found by review: a request without a known key took the lane of its client's address, so
/// one host rotating through its IPv6 /64 took a lane, and a turn, per address. It takes its
/// network's, as the throttle counts them.
#[test]
fn an_unknown_senders_lane_is_its_network_not_each_address() {
    let lane = |a: &str| Lane::of(None, Some(crate::throttle::network(a.parse().unwrap())));
    assert_eq!(lane("2001:db8::1"), lane("2001:db8::ffff:2"));
    assert_ne!(lane("2001:db8::1"), lane("2001:db8:0:1::1"));
    assert_ne!(lane("192.0.2.7"), lane("192.0.2.8"));
    assert_eq!(
        Lane::of(Some("alice"), None),
        Lane::Principal("alice".into())
    );
}
