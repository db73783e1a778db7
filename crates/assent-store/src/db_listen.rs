//! Hearing other replicas' writes on Postgres: a thread that LISTENs on a schema's change
//! channels and calls back once per notification ([`Heard::Changed`]), and [`Heard::Resync`]
//! after every (re)connect, because notifications sent while it was disconnected are lost and
//! whoever listens must re-read what it waits for. SQLite has no such thread (one process).

use crate::db_pg::{channel, connect_client};
use crate::db_value::{Change, DbError};
use postgres::fallible_iterator::FallibleIterator;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a [`Listener`] heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A committed write changed this (possibly a write of this very process).
    Changed(Change),
    /// The listener (re)connected: anything may have changed meanwhile; re-read.
    Resync,
}

/// How often the thread looks at its stop flag, and how often an idle connection is probed.
const TICK: Duration = Duration::from_millis(200);
/// An idle connection is probed every this many ticks (about 10 s).
const PROBE_TICKS: u32 = 50;
/// The longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The listening thread; dropping it stops the thread (within about 200 ms) and waits for it.
pub struct Listener {
    stop: Arc<AtomicBool>,
    listening: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    /// Whether LISTEN is in place now: `false` before the first connect and while the
    /// connection is down (reconnecting), when notifications are lost (a replica then does
    /// not hear the others' decisions until it resyncs: `/readyz` says so).
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a thread that connects with `url`, LISTENs on the change channels of the schema
/// its `search_path` names, and calls `on` for each notification, in the order Postgres
/// delivers them (commit order). It calls `on(Resync)` once LISTEN is in place after every
/// connect, and reconnects with backoff (100 ms doubling to 5 s) when the connection fails.
/// `on` runs on the listener's thread and should return quickly. `Unusable` when the thread
/// cannot be started.
pub fn listen(url: &str, on: impl Fn(Heard) + Send + 'static) -> Result<Listener, DbError> {
    let stop = Arc::new(AtomicBool::new(false));
    let listening = Arc::new(AtomicBool::new(false));
    let (url, flag, up) = (url.to_string(), stop.clone(), listening.clone());
    let thread = std::thread::Builder::new()
        .name("assent-listen".into())
        .spawn(move || run(&url, (&flag, &up), &on))
        .map_err(|e| DbError::Unusable(format!("no listener thread: {e}")))?;
    Ok(Listener {
        stop,
        listening,
        thread: Some(thread),
    })
}

/// Connects, listens and reconnects until `stop`; `up` says whether LISTEN is in place.
fn run(url: &str, (stop, up): (&AtomicBool, &AtomicBool), on: &dyn Fn(Heard)) {
    let mut backoff = Duration::from_millis(100);
    while !stop.load(Ordering::SeqCst) {
        let began = std::time::Instant::now();
        let served = serve(url, (stop, up), on);
        // A connection that listened for a while starts the backoff afresh (found: it only
        // grew, so a replica whose listener had dropped a few times in its life waited 5 s
        // each time); one dropped at once does not (a server refusing it spins no loop).
        let lasted = began.elapsed() >= Duration::from_secs(1);
        if (up.swap(false, Ordering::SeqCst) && lasted) || served.is_ok() {
            backoff = Duration::from_millis(100);
        }
        if served.is_ok() {
            continue;
        }
        let until = std::time::Instant::now() + backoff;
        while !stop.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(TICK.min(backoff));
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection's life: LISTEN, `Resync`, then notifications until the connection fails
/// (`Err`) or the stop flag is set (`Ok`); `up` is set once LISTEN is in place.
fn serve(
    url: &str,
    (stop, up): (&AtomicBool, &AtomicBool),
    on: &dyn Fn(Heard),
) -> Result<(), DbError> {
    let (mut client, _, oid) = connect_client(url)?;
    let prefix = channel(oid, "");
    let sql: Vec<String> = Change::KINDS
        .iter()
        .map(|k| format!("LISTEN {}", channel(oid, k)))
        .collect();
    client.batch_execute(&sql.join("; "))?;
    up.store(true, Ordering::SeqCst);
    on(Heard::Resync);
    let mut idle = 0;
    while !stop.load(Ordering::SeqCst) {
        let heard = client.notifications().timeout_iter(TICK).next()?;
        let Some(n) = heard else {
            idle += 1;
            if idle >= PROBE_TICKS {
                idle = 0;
                client.is_valid(Duration::from_secs(5))?;
            }
            continue;
        };
        idle = 0;
        let change = n
            .channel()
            .strip_prefix(&prefix)
            .and_then(|kind| Change::from_parts(kind, n.payload()));
        if let Some(c) = change {
            on(Heard::Changed(c));
        }
    }
    Ok(())
}
